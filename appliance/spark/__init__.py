"""The SparkSession, and running Python work as Spark tasks."""
