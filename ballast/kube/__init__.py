"""The Kubernetes API as Ballast talks to it: the client over the official library, the reflector
(list + watch), the bind verb's lean and async transports."""
