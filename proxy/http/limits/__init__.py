"""Team limits at run time: the ``Limiter`` each worker admits and settles requests with, and
the stores it keeps the counters in: in the process, the supervisor's (``stores``) or Redis
(``redis_store``), with reservations made ahead (``prefetcher``)."""
