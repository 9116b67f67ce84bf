from tracekit.cli.main import entry

raise SystemExit(entry())
