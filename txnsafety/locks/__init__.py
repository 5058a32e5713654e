"""txnsafety.locks"""
