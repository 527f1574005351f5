"""Cursor pagination: stable pages while rows are added, no COUNT over big tables."""

from rest_framework.pagination import CursorPagination


class Cursor(CursorPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    ordering = "-created_at"
