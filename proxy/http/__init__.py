"""The HTTP shell: the upstream client (``connection``, ``pool``) on asyncio's public API."""
