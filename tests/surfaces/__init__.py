"""What users and other programs touch: the command line, the dashboard, the SQS API, Spark,
the examples and benchmarks as they are run, and the layering of keyqueue/'s imports."""
