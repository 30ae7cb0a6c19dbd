from tokenrouter.cli import main

raise SystemExit(main())
