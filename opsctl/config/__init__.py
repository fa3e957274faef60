"""Configuration: profiles and their checks, strict YAML, what each pinned sglang release does with
a setting, SLO and eval settings, and the RunSpec a deployment becomes. Pure and importable by every
room; it imports only core, argspec (the releases' own parsers and records) and engine's data types.
"""
