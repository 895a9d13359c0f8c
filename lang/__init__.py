"""sprig.lang"""
