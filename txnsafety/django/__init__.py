"""txnsafety.django"""
