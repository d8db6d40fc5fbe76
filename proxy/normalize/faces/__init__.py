"""Faces: the client APIs the gateway answers in besides OpenAI's chat (sans-IO).

A face parses its request into the canonical chat request that routing, limits and the upstream
dialects take, and presents the canonical answer in its own shape; to a provider that speaks its
API natively, the request goes as it came and the answer comes back as it was sent. The
Responses API's face is ``proxy.normalize.responses``; Anthropic's Messages API is
``anthropic``.
"""
