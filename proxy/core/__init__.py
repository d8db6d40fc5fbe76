"""The pure core: configuration, errors, auth, routing, balancing, circuits, SSE framing,
usage, metering and the request model. Imports neither aiohttp nor asyncio."""
