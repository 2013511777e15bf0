"""The ``Model`` protocol, reply types and the retry layer; the direct OpenAI-compatible route, the litellm route
(the only importer of litellm) and replay.
"""
