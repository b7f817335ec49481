"""What every program shares: flag conventions, logging, the health server, a metric set and Lease leader
election."""
