"""Team limits in operation: the supervisor's state store served to its workers
(``state_service``) and the limits' metrics (``metrics``)."""
