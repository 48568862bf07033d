"""What a person calls: ready-made pipelines over ember's models."""

from .sentence_embedder import SentenceEmbedder

__all__ = ["SentenceEmbedder"]
