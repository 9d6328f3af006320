"""The decoder: token table, position scheme, blocks, tied head and KV cache; its loss; the lean decoding
step; every layer's attention probabilities, recorded from its own forward pass.
May import: positions, config and the ground modules.
"""
