from nbprec.cli import main

raise SystemExit(main())
