"""Test support shared by every test area (imported as `support`: tests/conftest.py registers this
folder under that name, since pytest's importlib mode puts no test folder on sys.path; a script
run as a subprocess puts tests/ on its sys.path instead, see tests/tray/tray_host.py).

* `fakes` — `FakeEngine`, the one in-test `Controllable`;
* `cli` — `run_vcamd` (the CLI as a subprocess), `one_clear_line` (a refusal as a user error);
* `live` — `Wrapped` (a real face engine with a method replaced), `make_engine` (a looping `LiveEngine`);
* `waiting` — `wait_for`, the one way a test waits for a condition (never a fixed sleep);
* `video` — `read_video` (every frame of a file a test wrote), `video_fps`;
* `assets` — where the real test models and photos come from (`$VCAMD_TEST_ASSETS`, `../shared/assets`,
  a SHA-256-checked download), behind the `assets` fixture.
* `order` — the suite's longest files, started first (`pytest_collection_modifyitems` in tests/conftest.py);
* `heap` — `ReturnHeap`, which hands a test process's leftover heap back between tests.
"""
