"""Descriptors -> sample stats. The streaming faiss/BLAS engine lands with the scoring issue;
``bruteforce`` is the small dense reference it will be checked against."""
