"""Output: what each face gets (`compose`, pure), how a face is made unrecognisable (`obscure`,
pure), the placeholder cards (`placeholder`), and the last step — badge and sink (`publisher`)."""
