"""`octlm <command>`: one module per command word, each with `add_arguments(parser)` and `run(args)` over
library functions that tests call directly (`experiment` holds what the `experiment` commands share).
`octlm.cli` dispatches to them.
May import: every layer.
"""
