"""What a run leaves on disk: its folder (layout, lock, records), checkpoints written atomically and loaded
without running code, and the one converter to JSON.
May import: data, model, positions, config and the ground modules.
"""
