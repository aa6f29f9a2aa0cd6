from nbprec.cli import run

run()
