from vcamd import stopping

stopping.install()  # before anything else is imported: a SIGTERM from here on is a clean stop

from vcamd.cli import main  # noqa: E402

raise SystemExit(main())
