"""The swap on a GPU elsewhere: NVIDIA Triton Inference Server runs the face models, the camera stays here.

Client side (`[models] server = "grpc://HOST:PORT"`): `sessions.RemoteSessions` stands where
`vcamd.inference.runtime.Sessions` stands, and hands the swapper, enhancer and parser a `RemoteSession` that
stands where an ONNX Runtime session stands, so `Swapper`, `Enhancer` and `FaceParser` run one code
path and check the served models with their own contract code. `link.ServerLink` is the one
connection: TLS, reconnection with backoff, round-trip time. `wire` is how each role's tensors
cross the network (aligned crops as uint8 pixels, the source latent as float32), one definition
for both ends.

Server side (`vcamd serve`): `serve` starts a real Triton server (PyTriton) running the config's
models through ONNX Runtime; `repository` writes a model repository for NVIDIA's Triton container;
`pairing` makes the certificates for mutual TLS and the one bundle a client needs.

Nothing here is a protocol of our own: it is Triton's gRPC API, through tritonclient.
"""
