"""An OpenAI-compatible LLM gateway: canonical output from every provider, metered per team."""

__version__ = "0.1.0"
