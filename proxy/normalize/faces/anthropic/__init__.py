"""Anthropic's Messages API as a face (docs/anthropic-face.md): ``request`` makes a Messages
request the canonical chat request, ``present`` shows the canonical answer as Anthropic's,
``passthrough`` relays an Anthropic upstream's own answer, ``errors`` Anthropic's envelope."""
