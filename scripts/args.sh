# Sourced by the bash scripts beside it, before they do anything: `-h`/`--help` prints the
# script's header comment (its usage) and exits 0, and an argument the script does not take is
# a named error (exit 2), so that a typo never runs the whole script with its defaults.
#
#   takes_args "--engine" "$@"    at most one argument, one of the words given ("": none)
#   takes_args "*" "$@"           any arguments (only -h/--help is handled)

script_usage() {  # the comment block after the shebang, without its "# "
  awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"
}

takes_args() {
  local allowed="$1"
  shift
  case "${1:-}" in -h | --help) script_usage; exit 0 ;; esac
  [[ "$allowed" == "*" || $# -eq 0 ]] && return 0
  local word
  for word in $allowed; do
    if [[ "$1" == "$word" && $# -eq 1 ]]; then return 0; fi
  done
  printf '%s: unknown argument(s) %s; it takes %s (--help shows the usage)\n' \
    "$(basename "$0")" "$*" "${allowed:-none}" >&2
  exit 2
}
