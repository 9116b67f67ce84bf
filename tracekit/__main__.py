from tracekit.cli import main

raise SystemExit(main())
