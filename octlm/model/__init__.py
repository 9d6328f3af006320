"""The decoder: token table, position scheme, blocks, tied head and KV cache; its loss; the lean decoding step.
May import: positions, config and the ground modules.
"""
