from octlm.cli import main

raise SystemExit(main())
