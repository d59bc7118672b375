// A JSON grammar in GBNF (full string escapes and numbers), written for the grammar tests and the
// grammar mask benchmark (independent of engine::json_object_gbnf()).
#pragma once

namespace graft::test {

constexpr const char* kJsonGbnf = R"~(# JSON text
root    ::= ws value ws
value   ::= object | array | string | number | "true" | "false" | "null"
object  ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member  ::= string ws ":" ws value
array   ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string  ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number  ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws      ::= [ \t\n\r]*
)~";

}  // namespace graft::test
