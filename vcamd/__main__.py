import sys

from vcamd.common import stopping

stopping.install()  # before anything else is imported: a SIGTERM from here on is a clean stop

try:
    from vcamd.cli import main
except stopping.Stopped:  # while the command line's own modules load
    raise SystemExit(stopping.stopped(sys.argv[1:])) from None

raise SystemExit(main())
