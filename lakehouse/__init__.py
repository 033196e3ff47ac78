"""What the speed layer (streaming/) and the batch layer (jobs/) both stand on: the Spark
session and the jars it needs (Maven, cached), the Delta tables (reads, idempotent appends,
creation, the plan <-> row codec) and the storage they live on (local, ``s3a://``,
``hdfs://``), and where Spark's log lines go. One module each, so that a batch job never
imports the streaming job to get a session."""
