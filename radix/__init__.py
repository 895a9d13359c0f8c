"""sprig.radix"""
