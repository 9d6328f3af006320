"""octlm runs for other tools: Hugging Face `transformers` folders, ONNX graphs, and the web site's fixtures.
May import: inspect, storage, data, model, positions, config and the ground modules.
"""
