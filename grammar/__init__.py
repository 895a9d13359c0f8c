"""sprig.grammar"""
