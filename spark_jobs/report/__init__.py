"""What the merge job tells about itself: each micro-batch's figures and latency, the status file and
Prometheus text, whether it keeps pace with its partitions, the batch running now.
"""
