"""The HTTP shell: the upstream client (``connection``, ``pool``, ``upstream``), the relay of
answers to the client (``relay``, ``pipe``, ``reply``), the handlers (``completion``) and the
app (``app``, ``state``)."""
