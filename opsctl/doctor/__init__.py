"""`opsctl doctor`: one table of checks of the host a profile runs on (app.py), printed by
view.py."""
