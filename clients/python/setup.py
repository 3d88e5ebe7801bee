"""Build hook: generates the gRPC/protobuf stubs (trainyard/v1/*_pb2*.py) from
../../proto at build time, so they are in the wheel but never in git.
Uses python3 -m grpc_tools.protoc when available, else protoc + grpc_python_plugin."""

import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        import importlib.util
        spec = importlib.util.spec_from_file_location("_trainyard_stubs",
                                                      HERE / "trainyard" / "_stubs.py")
        _stubs = importlib.util.module_from_spec(spec)  # stdlib only; no package import
        spec.loader.exec_module(_stubs)
        proto_dir = Path(os.environ.get("TRAINYARD_PROTO_DIR", HERE.parent.parent / "proto"))
        _stubs.generate(proto_dir, Path(self.build_lib))


setup(cmdclass={"build_py": BuildWithStubs})
