"""Operations: what an operator reads and does across queues (``admin``), the Prometheus metrics
(``metrics``), OpenTelemetry traces (``tracing``) and the web dashboard (``dashboard``, its page in
``web``)."""
