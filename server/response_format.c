/* response_format: the field's shape here, the schema's subset and caps in
 * the engine's compiler (engine/json_schema.c). */
#include <string.h>

#include "response_format.h"

static int compile(const json_t *schema, latent_json_grammar **out, srv_error *e) {
    latent_json_error err;
    *out = latent_json_grammar_compile(schema, &err);
    if (*out) return 0;
    return srv_error_set(e, SRV_ERR_INVALID_FIELD, "response_format",
                         "response_format schema: %s (keyword '%s' at JSON pointer '%s')", err.msg, err.keyword, err.pointer);
}

int srv_response_format_parse(const json_t *v, latent_json_grammar **out, srv_error *e) {
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    const json_t *type = json_is_object(v) ? json_object_get(v, "type") : NULL;
    if (!json_is_string(type))
        return srv_error_set(e, SRV_ERR_INVALID_FIELD, "response_format",
                             "'response_format' must be an object with 'type' \"text\", \"json_object\" or \"json_schema\"");
    const char *t = json_string_value(type);
    if (!strcmp(t, "text")) return 0;
    if (!strcmp(t, "json_object")) return compile(NULL, out, e);
    if (strcmp(t, "json_schema"))
        return srv_error_set(e, SRV_ERR_INVALID_FIELD, "response_format.type",
                             "response_format type '%.64s' is not one of \"text\", \"json_object\", \"json_schema\"", t);
    const json_t *js = json_object_get(v, "json_schema");
    if (!json_is_object(js))
        return srv_error_set(e, SRV_ERR_INVALID_FIELD, "response_format.json_schema", "'response_format.json_schema' must be an object");
    const json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict"), *schema = json_object_get(js, "schema");
    if (name && !json_is_string(name))
        return srv_error_set(e, SRV_ERR_INVALID_FIELD, "response_format.json_schema.name", "'name' must be a string");
    if (strict && !json_is_boolean(strict) && !json_is_null(strict))
        return srv_error_set(e, SRV_ERR_INVALID_FIELD, "response_format.json_schema.strict", "'strict' must be a boolean");
    if (!schema) return compile(json_true(), out, e); /* no schema: any JSON value (OpenAI's default) */
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return srv_error_set(e, SRV_ERR_INVALID_FIELD, "response_format.json_schema.schema", "'schema' must be a JSON Schema object");
    return compile(schema, out, e);
}
