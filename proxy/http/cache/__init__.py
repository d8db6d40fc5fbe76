"""The response cache's stores and the handler's use of them (docs/cache.md)."""
