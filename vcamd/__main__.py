from vcamd.cli import main

raise SystemExit(main())
