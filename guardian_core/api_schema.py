"""The OpenAPI schema's shared parts: the one error body every endpoint answers with, and the
AutoSchema that documents it on every operation."""

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse

# guardian_core.api.error_body: each bad field (or "detail") → its messages.
ERROR_SCHEMA = {
    "type": "object",
    "description": 'Each bad input field, or "detail" for the request as a whole, with the '
    "list of what is wrong with it.",
    "additionalProperties": {"type": "array", "items": {"type": "string"}},
    "example": {"reason": ["reason: a rejection needs a reason the actor can act on"]},
}
ErrorResponse = OpenApiResponse(response=ERROR_SCHEMA, description="What is wrong, per field.")


class GuardianAutoSchema(AutoSchema):
    """drf-spectacular's AutoSchema, plus the error responses every operation can give: 400
    (bad input), 403 (not signed in, or not this role), and 404 on a path naming an object."""

    def _get_response_bodies(self, direction: str = "response") -> dict:
        responses = super()._get_response_bodies(direction)
        errors = {"400": "Bad input: every bad field named.", "403": "Not allowed."}
        if "{" in self.path:
            errors["404"] = "No such object."
        for code, description in errors.items():
            if code not in responses:
                responses[code] = {
                    "content": {"application/json": {"schema": ERROR_SCHEMA}},
                    "description": description,
                }
        return responses
