"""The node's NodeResourceTopology: crane's object, the community (v1alpha2) one, and the publisher that
writes only changes."""
