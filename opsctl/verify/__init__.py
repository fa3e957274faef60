"""`opsctl verify`: the settings a running server resolved, checked against the profile.

facts (per pinned release: where each setting is reported and its default), checks (pure
comparison), checkpoint (checkpoint identity), app (the command, collaborators passed in), view
(rich output).
"""
