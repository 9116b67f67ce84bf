from tracekit.cli.main import main

raise SystemExit(main())
