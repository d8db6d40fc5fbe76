"""Team limits, pure (docs/limits.md): the windows, the admission decision and the settlement
(``admission``), their configuration (``config``), the stores' reference semantics (``memory``)
and Redis scripts (``scripts``), reservations made ahead (``prefetch``), the ledger of usage
(``ledger``), the sums of settlements sent per batch (``tally``) and what a team's limits show
(``view``)."""
