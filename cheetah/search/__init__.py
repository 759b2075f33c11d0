"""Semantic codebase search: chunking, embedders, an incrementally updated index, training."""
