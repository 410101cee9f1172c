import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("SCALERL_CACHE", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "scalerl"))
