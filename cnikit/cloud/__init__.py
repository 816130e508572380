"""Embedded EC2: moto (or LocalStack) behind the EC2 gate."""
