"""The response cache's pure parts (docs/cache.md): its configuration, the key of a request,
the client's Cache-Control, and what an entry holds."""
