"""``specdec bisect``: which engine build, in a list of candidates, made a config slower.

``candidates`` reads the candidates file; ``search`` is git bisect's range and next pick;
``step`` measures one candidate and the bad endpoint against the good one in interleaved
server sessions, decided by the verdict engine at the looks of its sequential plan; ``run``
searches step by step and concludes; ``statefile`` keeps the finished steps for a resume;
``build`` makes candidates that name a ref (``--build-cmd``); ``live`` measures on this
machine through the driver's steps; ``summary`` renders the answer; ``app`` ties them to the
command's flags. Order of import, top to bottom: app, summary | live, run | build | statefile,
step, search | candidates.

May import the driver and every layer below it; never the pytest face or the CLI.
"""
