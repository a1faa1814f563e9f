from parcalc.cli import app

app(prog_name="parcalc")
