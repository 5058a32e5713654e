"""txnsafety.sqlalchemy"""
